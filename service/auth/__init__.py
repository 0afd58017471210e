"""Access tokens with scopes: token format and keyed hashing (`tokens`), the request dependencies that check
them (`deps`), the use cases shared by the HTTP routes and the `fp8-policy token` commands (`actions`)."""
