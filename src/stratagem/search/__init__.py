"""The search: the run loop, budgets and stop rules, and the policies that propose designs."""
