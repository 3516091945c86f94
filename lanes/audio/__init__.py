"""Audio lanes: speech-to-text models served by a lane process of their own (see README.md)."""
