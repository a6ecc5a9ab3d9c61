"""``certify``: the table of checks, running it, the certificate, and the planted-bug sensitivity."""
