from django.contrib.auth import views as auth_views

from console.access import navigation
from control_plane.accounts.forms import ThrottledAuthenticationForm


class SignInView(auth_views.LoginView):
    """Django's login view with the accounts app's throttled form (brute-force protection)."""

    template_name = "console/login.html"
    authentication_form = ThrottledAuthenticationForm
    redirect_authenticated_user = True

    def get_default_redirect_url(self):
        from django.urls import reverse

        return reverse("console:dashboard")

    def get_context_data(self, **kwargs):
        return {**super().get_context_data(**kwargs), **navigation(self.request)}


class SignOutView(auth_views.LogoutView):
    next_page = "console:login"
