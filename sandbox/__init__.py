"""Local stand-ins for the systems the provider drives (tests, demo and CI share them)."""
