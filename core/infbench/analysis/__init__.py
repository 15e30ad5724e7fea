"""Analysis of stored cells: the roofline floor (MBU/MFU), analytical prediction and its
calibration, SLO selection."""
