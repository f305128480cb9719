"""A submission reaches SlurmHook as one typed SubmitRequest or as its fields, never both; bad
fields are refused before any connection is looked up."""

from __future__ import annotations

import pytest

from airflow_provider_pathways.hooks.slurm import SlurmHook
from airflow_provider_pathways.slurm.submit import SubmitRequest

# No connection of this id exists: every case below must fail before the hook needs one.
HOOK = SlurmHook(slurm_conn_id="no_such_connection")


def test_a_request_and_its_fields_together_are_refused() -> None:
    request = SubmitRequest.build(script="#!/bin/bash\necho hi\n")
    with pytest.raises(TypeError, match=r"give a SubmitRequest or its fields, not both .*job_name"):
        HOOK.submit_job(request, job_name="again")


async def test_the_async_twin_refuses_the_same() -> None:
    request = SubmitRequest.build(script="#!/bin/bash\necho hi\n")
    with pytest.raises(TypeError, match="not both"):
        await HOOK.a_submit_job(request, partition="p")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"script": "echo hi"}, "script must start with a '#!' line"),
        ({"script": "#!/bin/bash\n", "script_path": "/x.sh"}, "give exactly one of script"),
        ({"script": "#!/bin/bash\n", "time_limit": "0"}, "time_limit"),
        ({"script": "#!/bin/bash\n", "environment": {"1BAD": "x"}}, "environment"),
    ],
)
def test_bad_fields_name_the_field_before_any_connection(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        HOOK.submit_job(**fields)
