"""The dashboard: a dependency-free single-page app (service/web/static) served by the API's own app."""
