"""GCS emulator sandbox: launcher, on-disk seeding and a precondition-enforcing proxy."""
