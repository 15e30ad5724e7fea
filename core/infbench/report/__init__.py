"""Step 6 of a run: reports. Terminal tables and machine-readable exports live here."""
