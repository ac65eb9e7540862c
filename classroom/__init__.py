"""Classroom tooling: a student release of the course and autograding with nbgrader.

- :mod:`classroom.source` derives nbgrader "source" notebooks from the course notebooks and their solutions.
- :mod:`classroom.release` (``make release``) builds the student version of every notebook into ``release/``.
- :mod:`classroom.autograde` (``make autograde SUBMISSIONS=dir``) grades students' work: gradebook CSV and feedback.
- :mod:`classroom.recheck` runs the hidden tests: each check again, in a fresh interpreter, on fresh inputs.

The teacher's guide is ``docs/teaching.md``.
"""
