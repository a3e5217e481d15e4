import os

from hypothesis import HealthCheck, settings

# CI runs derandomised so a failure reproduces; locally hypothesis explores more.
settings.register_profile("ci", derandomize=True, max_examples=40, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=60, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))
