"""corral setting-sync: apply Longhorn's danger-zone settings to the managed workloads and pods the
moment it is safe (spec §3.3 groups A-C), and keep every Setting's `status.applied` true to the
cluster. Rules: core.py; what each setting touches: components.py; service definition: service.py."""
