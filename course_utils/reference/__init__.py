"""The checked reference implementations: the answers to the exercises, each tested against PyTorch's built-ins.
Notebooks reach them as ``course_utils.Name``; the grader's sandbox never mounts this folder for a submission,
except, with the capstone's model, where only the capstone's function is graded."""
