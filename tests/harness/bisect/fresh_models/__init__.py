"""Decode-step models written for bisect by someone who had not seen its planted models: two
correct, nine with one bug each (HF generation utilities, vLLM samplers and metadata
builders, speculative decoding). ``expected.json`` says what bisect must name."""
