"""Request limits both protocol parsers share (gateway/openai/requests.py, gateway/ollama/requests.py).

Limits of one protocol only (stop strings, prompts, logit_bias entries …) stay with its parser.
"""
MAX_MESSAGES = 1024           # chat messages per request
MAX_TOKENS_LIMIT = 1 << 20    # largest max_tokens / num_predict / min_tokens accepted (the context caps it later)
SEED_MAX = (1 << 64) - 1      # sampling seeds are unsigned 64-bit in the lanes
