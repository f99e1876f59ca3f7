"""Tests of the problem sets: their contracts, solutions, stubs and realistic mistakes."""
