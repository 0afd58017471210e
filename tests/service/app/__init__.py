"""Tests of the service as a whole app (service/app.py and the top modules): start-up cost, the OpenAPI document,
the error classes, the response models, the demo data and the server-side console script."""
