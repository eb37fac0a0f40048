import pytest
import torch

from coderai.bus.messages import Job
from coderai.engine.backends.base import token_biases
from coderai.engine.backends.transformers.sampling import adjust_logits
from coderai.errors import JobError


def job(**fields: float) -> Job:
    return Job(1, {}, "completion", "p", **fields)  # type: ignore[arg-type]


def test_penalties_follow_openais_formula_over_the_generated_tokens() -> None:
    row = torch.zeros(5)
    counts = {1: 3, 4: 1}  # token 1 generated three times, token 4 once
    adjust_logits(row, job(frequency_penalty=0.5, presence_penalty=0.25), {}, counts)
    assert row.tolist() == [0.0, -(3 * 0.5 + 0.25), 0.0, 0.0, -(1 * 0.5 + 0.25)]


def test_a_negative_penalty_rewards_repetition_and_no_penalty_changes_nothing() -> None:
    row = torch.zeros(3)
    adjust_logits(row, job(presence_penalty=-1.0), {}, {2: 2})
    assert row.tolist() == [0.0, 0.0, 1.0]
    untouched = torch.arange(3.0)
    adjust_logits(untouched, job(), {}, {0: 5})
    assert untouched.tolist() == [0.0, 1.0, 2.0]


def test_logit_bias_adds_to_the_named_tokens() -> None:
    row = torch.zeros(4)
    adjust_logits(row, job(), token_biases({"0": -100, "3": 2.5}, 4), {})
    assert row.tolist() == [-100.0, 0.0, 0.0, 2.5]


def test_a_bias_on_a_token_the_model_lacks_is_refused() -> None:
    with pytest.raises(JobError) as caught:
        token_biases({"4": 1.0}, 4)
    assert caught.value.kind == "bad_request"
    assert caught.value.message == "logit_bias names token 4; this model has 4 tokens"
