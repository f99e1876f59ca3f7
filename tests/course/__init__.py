"""Tests of the course's commands and shared parts: build, tidy, validate, release, redact; the book."""
