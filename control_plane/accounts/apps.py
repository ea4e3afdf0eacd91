from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "control_plane.accounts"
    label = "accounts"
    verbose_name = "Accounts"

    def ready(self) -> None:
        from django.contrib.auth import get_user_model
        from django.contrib.auth.signals import user_logged_in, user_login_failed
        from django.db.models.signals import post_delete, post_save

        from control_plane.accounts import schema  # noqa: F401 - registers the OpenAPI auth extension
        from control_plane.accounts.key_cache import on_key_saved, on_user_saved
        from control_plane.accounts.login_throttle import on_logged_in, on_login_failed
        from control_plane.accounts.models import ApiKey, Quota
        from control_plane.accounts.queries import quota_limits_forget

        user_login_failed.connect(on_login_failed, dispatch_uid="accounts.login_throttle.failed")
        user_logged_in.connect(on_logged_in, dispatch_uid="accounts.login_throttle.logged_in")
        post_save.connect(quota_limits_forget, sender=Quota, dispatch_uid="accounts.quota_limits.saved")
        post_delete.connect(quota_limits_forget, sender=Quota, dispatch_uid="accounts.quota_limits.deleted")
        # the key cache of every process drops what changed (control_plane/accounts/key_cache.py)
        post_save.connect(on_key_saved, sender=ApiKey, dispatch_uid="accounts.key_cache.key_saved")
        post_delete.connect(on_key_saved, sender=ApiKey, dispatch_uid="accounts.key_cache.key_deleted")
        post_save.connect(on_user_saved, sender=get_user_model(), dispatch_uid="accounts.key_cache.user_saved")
        post_delete.connect(on_user_saved, sender=get_user_model(), dispatch_uid="accounts.key_cache.user_deleted")
