"""Planted bugs in the protocol and the committer, and the runner that shows which tests catch each."""
