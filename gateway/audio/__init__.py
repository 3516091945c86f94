"""Speech to text: /v1/audio/transcriptions and /v1/audio/translations on audio lanes."""
