"""The OpenAPI description, built without a server: each operation's parameters, bodies,
answers and credentials, and the document as a whole (that it covers every route of the
app is tested in tests/integration/front/console/test_console_auth)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import openapi_spec_validator

import coderai
from coderai.catalogue.entries import ModelEntry
from coderai.front.console.accounts_api import NewUser
from coderai.front.console.openapi import (
    _ANY_OBJECT,
    EVENTS,
    JSON,
    OPERATIONS,
    Op,
    _operation,
    _path_params,
    document,
)


def doc() -> dict[str, Any]:
    """A copy of the (cached) document, as a client receives it."""
    copied: dict[str, Any] = json.loads(json.dumps(document()))
    return copied


def operations(described: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, methods in described["paths"].items():
        for method, operation in methods.items():
            yield method, path, operation


def refs(node: object) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield value
            else:
                yield from refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from refs(value)


# ---- _path_params --------------------------------------------------------------------


def test_path_parameters_are_the_braced_segments_in_order() -> None:
    assert _path_params("/admin/api/engines/{name}/drain") == ["name"]
    assert _path_params("/a/{first}/b/{second}") == ["first", "second"]
    assert _path_params("/v1/models/{model}") == ["model"]


def test_a_path_without_braces_has_no_parameters() -> None:
    assert _path_params("/v1/chat/completions") == []
    assert _path_params("/admin/api/openapi.json") == []


# ---- _operation ----------------------------------------------------------------------


def test_a_204_answer_describes_no_content() -> None:
    out = _operation(Op("DELETE", "/admin/api/keys/{id}", "Revoke", status=204), {})
    assert set(out["responses"]) == {"204", "4XX", "5XX"}
    assert out["responses"]["204"] == {"description": "Revoke"}


def test_a_success_carries_what_the_operation_produces_under_its_status() -> None:
    plain = _operation(Op("POST", "/admin/api/users", "Add", status=201), {})
    assert plain["responses"]["201"]["content"] == {JSON: {"schema": _ANY_OBJECT}}
    events = _operation(Op("GET", "/admin/api/events", "Feed", produces=EVENTS), {})
    assert set(events["responses"]["200"]["content"]) == {EVENTS}


def test_errors_refer_to_the_error_schema() -> None:
    out = _operation(Op("GET", "/health", "Health", access="open"), {})
    error = {"content": {JSON: {"schema": {"$ref": "#/components/schemas/Error"}}}}
    for status in ("4XX", "5XX"):
        assert {k: v for k, v in out["responses"][status].items() if k != "description"} == error


def test_path_parameters_are_required_strings_and_query_ones_optional_and_typed() -> None:
    op = Op("GET", "/a/{first}/b/{second}", "x", query=(("days", "integer"), ("q", "string")))
    assert _operation(op, {})["parameters"] == [
        {"name": "first", "in": "path", "required": True, "schema": {"type": "string"}},
        {"name": "second", "in": "path", "required": True, "schema": {"type": "string"}},
        {"name": "days", "in": "query", "schema": {"type": "integer"}},
        {"name": "q", "in": "query", "schema": {"type": "string"}},
    ]


def test_an_operation_without_parameters_lists_none() -> None:
    assert "parameters" not in _operation(Op("GET", "/admin/api/users", "Users"), {})


def test_a_model_body_is_a_reference_to_its_schema_which_is_collected() -> None:
    schemas: dict[str, Any] = {}
    out = _operation(Op("POST", "/admin/api/models", "Add", ModelEntry), schemas)
    assert out["requestBody"] == {
        "required": True,
        "content": {JSON: {"schema": {"$ref": "#/components/schemas/ModelEntry"}}},
    }
    assert set(schemas["ModelEntry"]["properties"]) >= {"id", "alias", "format"}
    assert "$defs" not in schemas["ModelEntry"]  # its nested schemas sit beside it
    for ref in refs(schemas):
        assert ref.removeprefix("#/components/schemas/") in schemas, ref


def test_a_plain_schema_body_is_inlined_and_collects_nothing() -> None:
    schemas: dict[str, Any] = {}
    out = _operation(Op("PATCH", "/admin/api/settings", "Change", _ANY_OBJECT), schemas)
    assert out["requestBody"]["content"][JSON]["schema"] == _ANY_OBJECT
    assert out["requestBody"]["required"] is True
    assert schemas == {}


def test_an_operation_without_a_body_has_no_request_body() -> None:
    schemas: dict[str, Any] = {}
    assert "requestBody" not in _operation(Op("GET", "/admin/api/users", "Users"), schemas)
    assert schemas == {}


def test_who_may_call_an_operation_is_its_security() -> None:
    def security(access: str) -> Any:
        return _operation(Op("GET", "/x", "x", access=access), {})["security"]

    assert security("admin") == [{"bearer": []}, {"session": []}]
    assert {} in security("api")  # a key is optional where keys are not required
    assert security("open") == []


def test_the_summary_is_the_operations() -> None:
    out = _operation(Op("POST", "/admin/api/users", "Add a console user", NewUser), {})
    assert out["summary"] == "Add a console user"
    assert out["responses"]["200"]["description"] == "Add a console user"


# ---- document ------------------------------------------------------------------------


def test_the_document_is_valid_openapi_3_1() -> None:
    described = doc()
    openapi_spec_validator.validate(described)
    assert described["openapi"] == "3.1.0"
    assert described["info"] == {"title": "CoderAI", "version": coderai.__version__}


def test_every_operation_is_described_once() -> None:
    described = {(m.upper(), p) for m, p, _ in operations(doc())}
    listed = [(op.method, op.path) for op in OPERATIONS]
    assert len(set(listed)) == len(listed)  # none would hide another
    assert described == set(listed)


def test_every_path_parameter_is_declared_and_nothing_else_is() -> None:
    for method, path, operation in operations(doc()):
        declared = [p["name"] for p in operation.get("parameters", []) if p["in"] == "path"]
        assert declared == re.findall(r"\{(\w+)\}", path), (method, path)


def test_every_reference_resolves_to_a_collected_schema() -> None:
    described = doc()
    schemas = described["components"]["schemas"]
    found = list(refs(described))
    assert found
    for ref in found:
        assert ref.removeprefix("#/components/schemas/") in schemas, ref
    bodies = {op.body.__name__ for op in OPERATIONS if isinstance(op.body, type)}
    assert bodies <= set(schemas)
    assert "Error" in schemas


def test_every_security_requirement_names_a_declared_scheme() -> None:
    described = doc()
    schemes = set(described["components"]["securitySchemes"])
    for _, path, operation in operations(described):
        for requirement in operation["security"]:
            assert set(requirement) <= schemes, path


def test_the_admin_api_needs_the_admin_and_the_model_routes_a_key() -> None:
    by_route = {(m.upper(), p): o["security"] for m, p, o in operations(doc())}
    assert by_route["GET", "/admin/api/keys"] == [{"bearer": []}, {"session": []}]
    assert by_route["POST", "/admin/api/login"] == []
    assert {} in by_route["POST", "/v1/chat/completions"]
    assert by_route["GET", "/metrics"] == []
