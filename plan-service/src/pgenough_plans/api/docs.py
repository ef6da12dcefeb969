"""The API's documentation pages, ``/docs`` (Swagger UI) and ``/redoc``, served without the
internet.

FastAPI's own pages load their JavaScript, CSS, favicon and fonts from CDNs, so on a machine
without internet access they are blank. Here the same pages load the files that the
``fastapi-offline`` package ships (Swagger UI and ReDoc's standalone bundle), mounted at
``ASSETS``. Both pages carry a Content-Security-Policy that lets them load nothing from
anywhere else, so the browser does not even try: ReDoc's bundle links its "API docs by
Redocly" logo to a CDN, which the policy refuses and ReDoc then hides. Build the app with
``docs_url=None, redoc_url=None`` and call ``install``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

import fastapi_offline
from fastapi import FastAPI, Request
from fastapi.openapi.docs import (
    get_redoc_html,
    get_swagger_ui_html,
    get_swagger_ui_oauth2_redirect_html,
)
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

DOCS: Final = "/docs"
REDOC: Final = "/redoc"
ASSETS: Final = "/docs/assets"
FILES: Final = Path(fastapi_offline.__file__).resolve().parent / "static"
# Swagger UI would otherwise send the schema to a public validator for its badge.
SWAGGER_PARAMETERS: Final = {"validatorUrl": None}
# Inline script and styles: both pages start from an inline <script>, and both libraries set
# style attributes. Workers from blob: URLs: ReDoc's search runs in one.
CSP: Final = (
    "default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline';"
    " img-src 'self' data:; font-src 'self' data:; worker-src 'self' blob:;"
    " connect-src 'self'; frame-ancestors 'self'"
)


def own_files_only(response: HTMLResponse) -> HTMLResponse:
    response.headers["content-security-policy"] = CSP
    return response


def install(app: FastAPI) -> None:
    openapi_url = app.openapi_url or "/openapi.json"
    oauth2_redirect = app.swagger_ui_oauth2_redirect_url or f"{DOCS}/oauth2-redirect"
    app.mount(ASSETS, StaticFiles(directory=FILES), name="docs-assets")

    def root(request: Request) -> str:
        return str(request.scope.get("root_path", "")).rstrip("/")

    @app.get(DOCS, include_in_schema=False)
    async def swagger_ui(request: Request) -> HTMLResponse:
        base = root(request)
        page = get_swagger_ui_html(
            openapi_url=base + openapi_url,
            title=f"{app.title} - Swagger UI",
            swagger_js_url=f"{base}{ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{base}{ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{base}{ASSETS}/favicon.png",
            oauth2_redirect_url=base + oauth2_redirect,
            swagger_ui_parameters=SWAGGER_PARAMETERS,
        )
        return own_files_only(page)

    @app.get(oauth2_redirect, include_in_schema=False)
    async def swagger_ui_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    @app.get(REDOC, include_in_schema=False)
    async def redoc(request: Request) -> HTMLResponse:
        base = root(request)
        page = get_redoc_html(
            openapi_url=base + openapi_url,
            title=f"{app.title} - ReDoc",
            redoc_js_url=f"{base}{ASSETS}/redoc.standalone.js",
            redoc_favicon_url=f"{base}{ASSETS}/favicon.png",
            with_google_fonts=False,
        )
        return own_files_only(page)
