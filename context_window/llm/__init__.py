"""The local model: the OpenAI-compatible client, calibration and summaries."""
