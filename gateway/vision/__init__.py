"""Images in chat: decoding and preprocessing on the gateway side (Pillow), as llama.cpp's mtmd does it."""
