"""An image by URL, fetched by the front for a model that reads images, where the
config's `media.fetch_urls` allows: http(s), public addresses only (web/page.py's
resolver and rule) unless `media.fetch_private`, redirects followed and checked, at most
`max_image_bytes` and `timeout_seconds`. Anything else, or a failure, leaves the image a
placeholder that says why."""

from __future__ import annotations

import aiohttp

from coderai.config import MediaConfig
from coderai.front.web.page import PublicResolver, body, checked_redirects


class NotFetched(Exception):
    """Why an image by URL is not read (the placeholder says it)."""


async def fetch_image(settings: MediaConfig, url: str) -> bytes:
    timeout = aiohttp.ClientTimeout(total=settings.timeout_seconds)
    resolver = None if settings.fetch_private else PublicResolver()
    try:
        async with aiohttp.ClientSession(
            timeout=timeout, connector=aiohttp.TCPConnector(resolver=resolver)
        ) as session:
            response = await checked_redirects(session, url, settings.fetch_private)
            async with response:
                if response.status != 200:
                    raise NotFetched(f"it answered {response.status}")
                raw = await body(response, settings.max_image_bytes + 1)
    except NotFetched:
        raise
    except Exception as exc:  # an address refused, a network failure, a timeout
        raise NotFetched(" ".join(str(exc).split())[:120] or exc.__class__.__name__) from None
    if len(raw) > settings.max_image_bytes:
        raise NotFetched(f"it is over {settings.max_image_bytes:,} bytes")
    return raw
