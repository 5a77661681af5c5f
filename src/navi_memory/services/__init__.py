"""Services: the rules, run on the session they are given; they never open or commit one."""
