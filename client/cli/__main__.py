"""`python -m fp8_policy.client.cli`: the client commands alone (the console script `fp8-policy` has them too)."""

from fp8_policy.client.cli import main

if __name__ == "__main__":
    main()
