"""What a pull request names, decided from a repo's listing: the forms it is written in,
the files each form fetches, the id the model gets, and every refusal's message."""

from __future__ import annotations

import pytest

from coderai.pull.plan import PlanError, RepoFile, Request, parse, plan


def files(*names: str) -> list[RepoFile]:
    return [RepoFile(n, 100 + i, f"{i:064x}") for i, n in enumerate(names)]


GGUF_REPO = files(
    "README.md", "model-Q4_K_M.gguf", "model-Q8_0.gguf", "model-F16.gguf",
    "mmproj-model-F16.gguf", "mmproj-model-Q8_0.gguf",
)  # fmt: skip


@pytest.mark.parametrize(
    ("text", "request_"),
    [
        ("acme/model-GGUF", Request("acme/model-GGUF")),
        ("acme/model-GGUF:q8_0", Request("acme/model-GGUF", quant="Q8_0")),
        ("hf.co/acme/model-GGUF:Q4_K_M", Request("acme/model-GGUF", quant="Q4_K_M")),
        ("https://huggingface.co/acme/m", Request("acme/m")),
        ("acme/m/sub/x-Q2_K.gguf", Request("acme/m", file="sub/x-Q2_K.gguf")),
        (" acme/m.v2 ", Request("acme/m.v2")),
        ("hf.co/acme/m:latest", Request("acme/m")),  # Ollama's default tag
        ("https://hf.co/acme/m/blob/main/x-Q2_K.gguf", Request("acme/m", file="x-Q2_K.gguf")),
        (
            "https://huggingface.co/acme/m/resolve/main/a/b.gguf?download=true",
            Request("acme/m", file="a/b.gguf"),
        ),
    ],
)
def test_the_forms_a_model_is_named_in(text: str, request_: Request) -> None:
    assert parse(text) == request_


@pytest.mark.parametrize("text", ["acme", "acme/", "/m", "acme/m:", "acme/m:a:b", "a/b/c:d",
                                  "acme/m/", "acme/m:Q4 K"])  # fmt: skip
def test_what_is_no_model_name_is_refused_saying_the_forms(text: str) -> None:
    with pytest.raises(PlanError, match="is not user/repo"):
        parse(text)


def test_the_default_quantisation_is_fetched_with_no_projector() -> None:
    chosen = plan(Request("acme/model-GGUF"), GGUF_REPO)
    assert [f.name for f in chosen.files] == ["model-Q4_K_M.gguf"]
    assert (chosen.id, chosen.format, chosen.entry_file) == (
        "acme/model-GGUF:Q4_K_M", "gguf", "model-Q4_K_M.gguf")  # fmt: skip
    assert chosen.projector == "mmproj-model-F16.gguf"  # named, preferring F16; not fetched
    assert chosen.size == 101


def test_a_quantisation_missing_is_refused_naming_those_there() -> None:
    with pytest.raises(PlanError, match="has no Q5_K_M GGUF; it has F16, Q4_K_M, Q8_0"):
        plan(Request("acme/model-GGUF", quant="Q5_K_M"), GGUF_REPO)


def test_a_repo_without_the_default_quantisation_fetches_its_only_model() -> None:
    only = plan(Request("acme/x"), files("x-Q6_K.gguf", "README.md"))
    assert only.id == "acme/x:Q6_K"
    with pytest.raises(PlanError, match="no Q4_K_M GGUF; it has Q6_K, Q8_0"):
        plan(Request("acme/x"), files("x-Q6_K.gguf", "x-Q8_0.gguf"))


def test_a_split_model_is_fetched_whole_in_order_and_named_by_its_first_part() -> None:
    listing = files(
        "big-Q4_K_M-00002-of-00003.gguf", "big-Q4_K_M-00001-of-00003.gguf",
        "big-Q4_K_M-00003-of-00003.gguf", "big-Q8_0-00001-of-00002.gguf",
        "big-Q8_0-00002-of-00002.gguf",
    )  # fmt: skip
    chosen = plan(Request("acme/big"), listing)
    assert [f.name for f in chosen.files] == [
        f"big-Q4_K_M-0000{i}-of-00003.gguf" for i in (1, 2, 3)
    ]
    assert chosen.entry_file == "big-Q4_K_M-00001-of-00003.gguf"
    assert chosen.id == "acme/big:Q4_K_M"
    by_file = plan(Request("acme/big", file="big-Q8_0-00002-of-00002.gguf"), listing)
    assert [f.name for f in by_file.files] == [
        "big-Q8_0-00001-of-00002.gguf", "big-Q8_0-00002-of-00002.gguf"]  # fmt: skip
    assert by_file.entry_file == "big-Q8_0-00001-of-00002.gguf"


def test_a_split_model_missing_a_part_is_refused() -> None:
    listing = files("big-Q4_K_M-00001-of-00003.gguf", "big-Q4_K_M-00003-of-00003.gguf")
    with pytest.raises(PlanError, match="split in 3 parts and the repo has 2 of them"):
        plan(Request("acme/big"), listing)


def test_todays_quantisation_names_are_read() -> None:
    listing = files("gpt-oss-20b-MXFP4.gguf", "m-TQ1_0.gguf", "m-UD-Q4_K_XL.gguf")
    assert plan(Request("acme/m", quant="MXFP4"), listing).id == "acme/m:MXFP4"
    assert plan(Request("acme/m", quant="TQ1_0"), listing).id == "acme/m:TQ1_0"
    assert plan(Request("acme/m", quant="Q4_K_XL"), listing).id == "acme/m:Q4_K_XL"


def test_a_quantisation_may_be_a_folder() -> None:
    listing = files("Q4_K_M/m-00001-of-00002.gguf", "Q4_K_M/m-00002-of-00002.gguf",
                    "Q8_0/m.gguf")  # fmt: skip
    chosen = plan(Request("acme/m"), listing)
    assert chosen.id == "acme/m:Q4_K_M"
    assert len(chosen.files) == 2
    assert plan(Request("acme/m", quant="Q8_0"), listing).entry_file == "Q8_0/m.gguf"


def test_two_files_of_one_quantisation_ask_for_the_file() -> None:
    with pytest.raises(PlanError, match="name one as acme/m/FILE"):
        plan(Request("acme/m"), files("a-Q4_K_M.gguf", "b-Q4_K_M.gguf"))


def test_a_file_named_must_be_a_model_gguf_there() -> None:
    named = plan(Request("acme/model-GGUF", file="model-F16.gguf"), GGUF_REPO)
    assert named.id == "acme/model-GGUF:F16"
    with pytest.raises(PlanError, match=r"has no file 'nope\.gguf'"):
        plan(Request("acme/model-GGUF", file="nope.gguf"), GGUF_REPO)
    with pytest.raises(PlanError, match="is not a model GGUF"):
        plan(Request("acme/model-GGUF", file="mmproj-model-F16.gguf"), GGUF_REPO)


def test_a_transformers_repo_fetches_its_safetensors_config_and_tokenizer() -> None:
    listing = files(
        "config.json", "generation_config.json", "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors", "model.safetensors.index.json", "tokenizer.json",
        "tokenizer_config.json", "pytorch_model.bin", "README.md", "onnx/model.onnx",
        ".gitattributes",
    )  # fmt: skip
    chosen = plan(Request("acme/t"), listing)
    assert (chosen.id, chosen.format, chosen.entry_file) == ("acme/t", "transformers", "")
    assert [f.name for f in chosen.files] == [
        "config.json", "generation_config.json", "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors", "model.safetensors.index.json", "tokenizer.json",
        "tokenizer_config.json",
    ]  # fmt: skip


def test_what_is_no_model_is_refused_saying_why() -> None:
    with pytest.raises(PlanError, match=r"only pickled \.bin weights"):
        plan(Request("acme/old"), files("config.json", "pytorch_model.bin"))
    with pytest.raises(PlanError, match="neither a GGUF nor a transformers model"):
        plan(Request("acme/data"), files("README.md", "train.csv"))
    with pytest.raises(PlanError, match="no GGUF files, so no Q4_K_M"):
        plan(Request("acme/t", quant="Q4_K_M"), files("config.json", "model.safetensors"))
