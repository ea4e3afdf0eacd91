"""`scope_required` for plain (non-DRF) Django views, e.g. the async /v1 routes:

    @scope_required("inference")
    async def chat_completions(request):
        user, api_key = request.principal
        check_access(user, api_key, "inference", deployment_name)   # once the body names the model
        ...

It authenticates (Bearer key, else session with CSRF on unsafe methods), checks the scope
(and the deployment named by `deployment_kwarg`, if given) and answers 401/403 in OpenAI's
error shape. The view is csrf_exempt because API clients send no CSRF token; session
requests are still CSRF-checked by `principal`. The route matrix test reads
`required_scope` from the view to test it like every other route.
"""

from __future__ import annotations

import functools
import inspect

from control_plane.accounts.permissions import AccessDenied, check_access
from control_plane.accounts.principal import arequest_principal, request_principal
from control_plane.inference.errors import access_denied_error


def scope_required(scope: str, *, deployment_kwarg: str | None = None):
    def decorate(view):
        def admit(request, principal, kwargs) -> None:
            user, api_key = principal
            check_access(user, api_key, scope, kwargs.get(deployment_kwarg) if deployment_kwarg else None)
            request.principal = principal
            request.user = user

        if inspect.iscoroutinefunction(view):

            @functools.wraps(view)
            async def wrapper(request, *args, **kwargs):
                try:
                    admit(request, await arequest_principal(request), kwargs)
                except AccessDenied as denied:
                    return access_denied_error(denied).response()
                return await view(request, *args, **kwargs)

        else:

            @functools.wraps(view)
            def wrapper(request, *args, **kwargs):
                try:
                    admit(request, request_principal(request), kwargs)
                except AccessDenied as denied:
                    return access_denied_error(denied).response()
                return view(request, *args, **kwargs)

        wrapper.csrf_exempt = True
        wrapper.required_scope = scope
        wrapper.deployment_kwarg = deployment_kwarg
        return wrapper

    return decorate
