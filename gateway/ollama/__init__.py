"""The Ollama protocol: /api/chat, /api/generate (NDJSON), /api/tags, /api/show, /api/ps,
/api/version, GET|HEAD /. Requests map onto the same lanes, queue and native relay as the OpenAI
routes; only parsing and framing differ."""
