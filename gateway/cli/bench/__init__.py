"""`laneserve bench`: load generation against OpenAI-compatible servers, metrics, table, JSON, plot."""
