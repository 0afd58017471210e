"""Live: early warnings while a run is still training, found in each piece of new points as it arrives.

Belongs here: the statistics detectors, per series (`events`, the reference) and over every series of a piece at
once (`batch`, on the run's `table`; trend and rank rules in `trends`; the level a band crossing judges, `levels`;
how scale_inv values are read, `scales`), the record of one warning (`record`), their grouping per layer and kind
(`grouping`), a precision schedule's `switch_now` (`switch`), and the training scalars' detectors and columns
(`scalar_events`, `scalar_series`).
Must not be here: parsing (policy/parse/), recommendations (policy/recommend/), storing the state or the events
(db/live.py), and any web or database import.
"""
