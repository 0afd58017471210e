"""What the first /healthz after a (re)start waits for (issue 21: 1 s to its 200 on a restart). FastAPI builds the
route contexts of an included router (dependencies, response fields) when a request is first matched against it:
with /healthz registered after the API routers, its first answer built all of them (0.2 s of CPU). /healthz now
comes first, and the warm-up builds the others once the service serves (service/app.py `match_every_route`)."""

from __future__ import annotations

from fp8_policy.service.app import WARM_UP_PATH, create_app, match_every_route


def test_healthz_is_matched_before_any_api_router(app_settings) -> None:
    app = create_app(app_settings)
    paths = [getattr(route, "path", None) for route in app.router.routes]  # an included router has no path
    assert paths.index("/healthz") < paths.index(None), paths


def test_the_warm_up_matches_every_route_once_with_a_path_no_route_takes(app_settings) -> None:
    app = create_app(app_settings)
    seen: list[tuple[int, str]] = []
    for k, route in enumerate(app.router.routes):
        original = route.matches
        route.matches = lambda scope, k=k, original=original: seen.append((k, scope["path"])) or original(scope)
    match_every_route(app)
    assert seen == [(k, WARM_UP_PATH) for k in range(len(app.router.routes))]
