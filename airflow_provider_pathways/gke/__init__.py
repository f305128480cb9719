"""The GKE domain: the PathwaysJob/JobSet spec (:mod:`.spec`), TPU types and topologies
(:mod:`.tpu`), names (:mod:`.naming`), the resource kinds (:mod:`.resources`), a job's status read
from its objects (:mod:`.status`) and what a wait follows (:mod:`.wait`).

Free of Airflow and of the Kubernetes client libraries: the hooks in
:mod:`airflow_provider_pathways.hooks` fetch the objects these modules read.
"""
