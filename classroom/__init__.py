"""Classroom tooling: a student release of the course and autograding with nbgrader.

- :mod:`classroom.source` derives nbgrader "source" notebooks from the course notebooks and their solutions.
- :mod:`classroom.release` (``make release``) builds the student version of every notebook into ``release/``.
- :mod:`classroom.autograde` (``make autograde SUBMISSIONS=dir``) grades students' work: gradebook CSV and feedback.
- :mod:`classroom.grade` grades one notebook: its code in a sandbox (:mod:`classroom.sandbox`, :mod:`classroom.runner`),
  the checks in the grader's process, values exchanged as arrays (:mod:`classroom.wire`, never pickle).

The teacher's guide is ``docs/teaching.md``.
"""
