"""The instructor's side of each backend (`interfaces.StaffExchange`): what root's `hub release`, `status`,
`collect` and `feedback` do, run as the grader account."""
