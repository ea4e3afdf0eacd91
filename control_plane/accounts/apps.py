from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "control_plane.accounts"
    label = "accounts"
    verbose_name = "Accounts"

    def ready(self) -> None:
        from django.contrib.auth.signals import user_logged_in, user_login_failed
        from django.db.models.signals import post_delete, post_save

        from control_plane.accounts import schema  # noqa: F401 - registers the OpenAPI auth extension
        from control_plane.accounts.login_throttle import on_logged_in, on_login_failed
        from control_plane.accounts.models import Quota
        from control_plane.accounts.queries import quota_limits_forget

        user_login_failed.connect(on_login_failed, dispatch_uid="accounts.login_throttle.failed")
        user_logged_in.connect(on_logged_in, dispatch_uid="accounts.login_throttle.logged_in")
        post_save.connect(quota_limits_forget, sender=Quota, dispatch_uid="accounts.quota_limits.saved")
        post_delete.connect(quota_limits_forget, sender=Quota, dispatch_uid="accounts.quota_limits.deleted")
