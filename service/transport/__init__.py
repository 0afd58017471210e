"""How the service meets the network: connection caps and header timeouts (uvicorn protocol), body-read timeouts
(ASGI middleware), the concurrent-upload cap, and the uvicorn options `fp8-policy serve` starts with."""
