"""The API's own documentation pages, served from this process: no CDN, no request to another host."""
