"""The GKE domain, free of Airflow and of the Kubernetes client libraries (the hooks in
:mod:`airflow_provider_pathways.hooks` fetch the objects these modules read):

- :mod:`.spec`: the PathwaysJob/JobSet spec, its rules and rendering;
- :mod:`.tpu`, :mod:`.naming`, :mod:`.resources`: TPU types and topologies, names, resource kinds;
- :mod:`.status`: a job's phase and status; :mod:`.summary` reads it from the job's objects
  (:mod:`.job_objects`, :mod:`.object_fields`), with :mod:`.queueing` (Kueue) and
  :mod:`.failure_diagnosis` (why it failed);
- :mod:`.wait`: what a wait on a job follows.
"""
