"""The model-based protocol test's parts: an oracle that never reads protocol code, and the real world it judges."""
