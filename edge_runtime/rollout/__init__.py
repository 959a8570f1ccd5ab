"""Installing new model versions on a running box:
download → verify → stage → shadow → switch → probation → commit, or roll back.
"""
