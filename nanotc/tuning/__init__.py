"""Tuning: measuring register-tile and blocking candidates of a kernel's gemms on this machine
(`tuner`) and remembering the winners for later compiles (`database`)."""
