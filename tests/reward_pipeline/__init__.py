"""Tests of the reward verifiers and the code sandbox."""
