"""Hardware detection: what accelerators and CPU features a box has."""
