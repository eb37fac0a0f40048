"""The front's side of the bus: engines known, jobs and their queues, placement, the
catalogue as served, the engines' one view."""
