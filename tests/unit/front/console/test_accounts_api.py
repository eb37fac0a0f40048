"""What the admin API's account bodies accept and refuse (accounts_api's request models),
through `validate`, the one path every body takes: a refusal is the 400 the route answers,
naming the field (the routes are tested in tests/integration/front/console)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from coderai.errors import InvalidRequest
from coderai.front.console.accounts_api import Login, NewKey, NewPassword, NewUser
from coderai.front.http import validate


def refused(model: type[BaseModel], body: dict[str, Any]) -> str | None:
    """The field a refused body is refused for (the error's param)."""
    with pytest.raises(InvalidRequest) as caught:
        validate(model, body)
    return caught.value.param


# ---- every admin body --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "body"),
    [
        (Login, {"username": "admin", "password": "pw"}),
        (NewUser, {"username": "admin", "password": "long enough"}),
        (NewPassword, {"password": "long enough"}),
        (NewKey, {"name": "ci"}),
    ],
)
def test_a_field_the_api_does_not_know_is_refused_not_ignored(
    model: type[BaseModel], body: dict[str, Any]
) -> None:
    validate(model, body)  # accepted as it is
    assert refused(model, {**body, "role": "owner"}) == "role"


@pytest.mark.parametrize(
    ("model", "body", "field"),
    [
        (Login, {"username": 7, "password": "pw"}, "username"),
        (NewUser, {"username": "admin", "password": 12345678}, "password"),
        (NewKey, {"name": "ci", "rpm": "60"}, "rpm"),
        (NewKey, {"name": "ci", "rpm": 60.0}, "rpm"),
        (NewKey, {"name": "ci", "max_concurrent": True}, "max_concurrent"),
        (NewKey, {"name": "ci", "models": "m"}, "models"),
    ],
)
def test_values_are_taken_as_sent_never_converted(
    model: type[BaseModel], body: dict[str, Any], field: str
) -> None:
    assert refused(model, body) == field


def test_a_missing_field_is_refused_by_name() -> None:
    assert refused(Login, {"username": "admin"}) == "password"
    assert refused(NewKey, {}) == "name"


# ---- Login -------------------------------------------------------------------------------


def test_a_login_only_bounds_its_fields_the_password_check_does_the_rest() -> None:
    """Any name is compared against the users (an empty one too): a login refused for its
    form would tell a guesser which names cannot exist."""
    assert validate(Login, {"username": "", "password": ""}).username == ""
    assert validate(Login, {"username": "x" * 64, "password": "p" * 1024}).password == "p" * 1024
    assert refused(Login, {"username": "x" * 65, "password": "pw"}) == "username"
    assert refused(Login, {"username": "admin", "password": "p" * 1025}) == "password"


# ---- NewUser and NewPassword -------------------------------------------------------------


@pytest.mark.parametrize("name", ["a", "alice", "Ops_2.team-a@example.org", "x" * 64])
def test_a_username_of_letters_digits_and_dot_at_dash_underscore_is_accepted(name: str) -> None:
    assert validate(NewUser, {"username": name, "password": "long enough"}).username == name


@pytest.mark.parametrize(
    "name", ["", "x" * 65, "two words", "ünïcode", "semi;colon", "slash/name", "alice\n"]
)
def test_any_other_username_is_refused(name: str) -> None:
    assert refused(NewUser, {"username": name, "password": "long enough"}) == "username"


@pytest.mark.parametrize("model", [NewUser, NewPassword])
def test_a_new_password_has_eight_to_1024_characters(model: type[BaseModel]) -> None:
    user = {"username": "alice"} if model is NewUser else {}
    validate(model, {**user, "password": "8 chars!"})
    validate(model, {**user, "password": "p" * 1024})
    assert refused(model, {**user, "password": "7 chars"}) == "password"
    assert refused(model, {**user, "password": ""}) == "password"
    assert refused(model, {**user, "password": "p" * 1025}) == "password"


# ---- NewKey ------------------------------------------------------------------------------


def test_a_key_needs_only_a_name_and_leaves_every_limit_unset() -> None:
    key = validate(NewKey, {"name": "ci"})
    assert (key.models, key.expires_at, key.rpm, key.tpm, key.max_concurrent) == (
        None, None, None, None, None,
    )  # fmt: skip


def test_a_key_name_has_one_to_100_characters() -> None:
    assert validate(NewKey, {"name": "k" * 100}).name == "k" * 100
    assert refused(NewKey, {"name": ""}) == "name"
    assert refused(NewKey, {"name": "k" * 101}) == "name"


@pytest.mark.parametrize("field", ["rpm", "tpm", "max_concurrent"])
def test_a_limit_is_at_least_one_or_null(field: str) -> None:
    assert getattr(validate(NewKey, {"name": "ci", field: 1}), field) == 1
    assert getattr(validate(NewKey, {"name": "ci", field: None}), field) is None
    assert refused(NewKey, {"name": "ci", field: 0}) == field
    assert refused(NewKey, {"name": "ci", field: -5}) == field


def test_an_expiry_is_a_positive_time_whole_or_not() -> None:
    assert validate(NewKey, {"name": "ci", "expires_at": 1.5}).expires_at == 1.5
    assert validate(NewKey, {"name": "ci", "expires_at": 1}).expires_at == 1.0
    assert refused(NewKey, {"name": "ci", "expires_at": 0}) == "expires_at"
    assert refused(NewKey, {"name": "ci", "expires_at": -1.0}) == "expires_at"


def test_a_keys_models_are_a_list_of_names_possibly_empty() -> None:
    assert validate(NewKey, {"name": "ci", "models": ["a", "b"]}).models == ["a", "b"]
    assert validate(NewKey, {"name": "ci", "models": []}).models == []
    assert refused(NewKey, {"name": "ci", "models": ["a", 2]}) == "models.1"
