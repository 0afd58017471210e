"""The formats the service renders a recommendation in (`GET .../recommendation?format=`): the client checks
them and the CLI offers them as `--format` choices, without importing the HTTP client for it."""

FORMATS = ("json", "te-yaml", "megatron", "hydra", "torchao", "te-recipe", "torchtitan", "te-monitor")
