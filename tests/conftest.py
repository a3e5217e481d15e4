import os
import tempfile

from hypothesis import HealthCheck, settings

# A private tuning database for the whole run (subprocesses inherit it): what the user has
# tuned must not change what the tests compile, and tests must not write into it.
os.environ["LOOPSTACK_TUNING_DB"] = os.path.join(tempfile.mkdtemp(prefix="loopstack-tests-"), "tuning.db")

# CI runs derandomised so a failure reproduces; locally hypothesis explores more.
settings.register_profile("ci", derandomize=True, max_examples=40, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=60, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))
