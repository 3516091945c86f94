"""The laneserve HTTP gateway (OpenAI and Ollama protocols over lanes)."""
