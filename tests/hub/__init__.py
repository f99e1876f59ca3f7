"""Tests of the hub: autograder/hub/ (the real-hub modules, test_hub_*, need root and
DEVICELAB_HUB_TESTS=1)."""
