"""The GKE domain, free of Airflow and of the Kubernetes client libraries (the hooks in
:mod:`airflow_provider_pathways.hooks` fetch the objects these modules read):

- :mod:`.spec`: the PathwaysJob/JobSet spec, its rules and rendering;
- :mod:`.tpu`: TPU types and topologies;
- :mod:`.objects`: the Kubernetes objects a job is made of, their names, labels and fields;
- :mod:`.status`: a job's status read from its objects, with Kueue queueing and what a wait
  follows; :mod:`.failure_diagnosis`: why a job failed;
- :mod:`.task_job`: a task instance's job: its name and labels, its spec, which try it belongs to.
"""
