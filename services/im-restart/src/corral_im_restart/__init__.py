"""corral im-restart: delete an idle instance manager's pod whose spec lags the danger-zone
settings (once, however many settings changed), a failed one always, and never a busy one; keep
its SettingSynced condition. Rules: core.py and judge.py; service definition: service.py."""
