"""The LMS (LTI 1.3): launches, the accounts of its people, its class list and grade passback."""
