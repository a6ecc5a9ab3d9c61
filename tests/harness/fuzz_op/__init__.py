"""``fuzz-op``: a user's break op judged against the contract its spec declares."""
