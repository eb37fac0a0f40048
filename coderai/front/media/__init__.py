"""What a request carries that is not text (images, audio, files such as PDFs), turned into
what the model reads in its place: a document's text, or a short placeholder that says
what was there and why it is not shown. An agent resends its whole history every turn, so
one screenshot must never make a conversation unanswerable: nothing here refuses a
request, and the same bytes always give the same text (the prefix cache keeps hitting).

`medium.py` names a part's content wherever it came from (the three APIs' shapes),
`source.py` decodes it, `image.py` and `document.py` read bytes, and `shown.py` decides
the text and caches it by the content's hash."""
