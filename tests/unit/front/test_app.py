"""Which answers the front counts in its metrics (app.count_answer): every /v1 answer, by
its route's pattern and its status. Served by an in-process aiohttp test server with the
front's own error middleware, which calls it for every answer."""

from __future__ import annotations

import asyncio

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from coderai.errors import ModelNotFound
from coderai.front.app import METRICS, count_answer
from coderai.front.http import error_boundary
from coderai.front.metrics import Metrics


async def model(request: web.Request) -> web.Response:
    if request.match_info["model"] == "gone":
        raise ModelNotFound("no model 'gone'")
    return web.json_response({"id": request.match_info["model"]})


async def ok(request: web.Request) -> web.Response:
    return web.json_response({})


def counts(paths: list[str]) -> dict[tuple[str, str], float]:
    """The requests counted, by (route, status), once each path is asked for."""
    metrics = Metrics()
    app = web.Application(middlewares=[error_boundary(count_answer)])
    app[METRICS] = metrics
    app.router.add_get("/v1/models/{model}", model)
    app.router.add_get("/v1/models", ok)
    app.router.add_get("/health", ok)
    app.router.add_get("/v1x/models", ok)

    async def ask() -> None:
        async with TestClient(TestServer(app)) as client:
            for path in paths:
                async with client.get(path) as answer:
                    await answer.read()

    asyncio.run(ask())
    return {
        (sample.labels["route"], sample.labels["status"]): sample.value
        for family in metrics.registry.collect()
        if family.name == "coderai_requests"
        for sample in family.samples
        if sample.name == "coderai_requests_total"
    }


def test_v1_answers_are_counted_by_their_routes_pattern_and_status() -> None:
    assert counts(["/v1/models/a", "/v1/models/b", "/v1/models/gone", "/v1/models"]) == {
        ("/v1/models/{model}", "200"): 2,
        ("/v1/models/{model}", "404"): 1,
        ("/v1/models", "200"): 1,
    }


def test_a_v1_path_no_route_serves_is_counted_as_other() -> None:
    assert counts(["/v1/nothing", "/v1/nothing/else"]) == {("other", "404"): 2}


def test_answers_outside_v1_are_not_counted() -> None:
    assert counts(["/health", "/v1x/models", "/v1", "/missing"]) == {}
