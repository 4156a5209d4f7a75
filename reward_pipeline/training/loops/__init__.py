"""The training loops' drivers: the online loop (`online`), one continuous-retraining cycle on the `train`
queue (`cycle`), the whole loop on one machine (`local_run`), and the recorded stages they share (`stages`)."""
